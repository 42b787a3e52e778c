def merge_intervals(intervals):
    out = []
    for s, e in sorted((int(a), int(b)) for a, b in intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out
