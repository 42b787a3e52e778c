def rle_decode(s: str) -> str:
    out = []
    i = 0
    while i < len(s):
        j = i
        while s[j] in "0123456789":
            j += 1
        out.append(s[j] * int(s[i:j]))
        i = j + 1
    return "".join(out)
