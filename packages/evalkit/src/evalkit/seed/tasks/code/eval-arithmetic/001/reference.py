def evaluate(expr):
    toks = []
    i = 0
    while i < len(expr):
        c = expr[i]
        if c.isspace():
            i += 1
        elif c in "0123456789":
            j = i
            while j < len(expr) and expr[j] in "0123456789":
                j += 1
            toks.append(int(expr[i:j]))
            i = j
        else:
            toks.append(c)
            i += 1
    pos = 0

    def peek():
        return toks[pos] if pos < len(toks) else None

    def take():
        nonlocal pos
        pos += 1
        return toks[pos - 1]

    def factor():
        t = take()
        if t == "-":
            return -factor()
        if t == "(":
            v = expr_()
            take()
            return v
        return t

    def term():
        v = factor()
        while peek() in ("*", "/"):
            op = take()
            w = factor()
            if op == "*":
                v *= w
            else:
                q = abs(v) // abs(w)
                v = q if (v >= 0) == (w >= 0) else -q
        return v

    def expr_():
        v = term()
        while peek() in ("+", "-"):
            op = take()
            w = term()
            v = v + w if op == "+" else v - w
        return v

    return expr_()
