def merge_counts(a, b):
    out = {}
    for k in set(a) | set(b):
        v = a.get(k, 0) + b.get(k, 0)
        if v != 0:
            out[k] = v
    return out
