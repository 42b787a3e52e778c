def hex_to_rgb(s):
    body = s[1:] if s.startswith("#") else s
    if len(body) not in (3, 6) or any(c not in "0123456789abcdefABCDEF" for c in body):
        return None
    if len(body) == 3:
        body = "".join(c * 2 for c in body)
    return [int(body[i:i + 2], 16) for i in (0, 2, 4)]
