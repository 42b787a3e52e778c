def isbn_valid(s: str) -> bool:
    t = s.replace("-", "").replace(" ", "")
    digits = "0123456789"
    if len(t) == 10:
        if not all(c in digits for c in t[:9]) or not (t[9] in digits or t[9] in "Xx"):
            return False
        vals = [int(c) for c in t[:9]] + [10 if t[9] in "Xx" else int(t[9])]
        return sum(w * v for w, v in zip(range(10, 0, -1), vals)) % 11 == 0
    if len(t) == 13:
        if not all(c in digits for c in t):
            return False
        return sum((3 if i % 2 else 1) * int(c) for i, c in enumerate(t)) % 10 == 0
    return False
