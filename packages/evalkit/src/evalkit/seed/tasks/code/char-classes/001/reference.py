def char_classes(s):
    out = {"letters": 0, "digits": 0, "spaces": 0, "other": 0}
    for ch in s:
        if ch.isalpha():
            out["letters"] += 1
        elif ch.isdigit():
            out["digits"] += 1
        elif ch.isspace():
            out["spaces"] += 1
        else:
            out["other"] += 1
    return out
