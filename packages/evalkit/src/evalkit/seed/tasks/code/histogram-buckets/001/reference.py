import bisect

def bucket_counts(xs, edges):
    counts = [0] * (len(edges) - 1)
    for x in xs:
        if x < edges[0] or x > edges[-1]:
            continue
        if x == edges[-1]:
            counts[-1] += 1
            continue
        counts[bisect.bisect_right(edges, x) - 1] += 1
    return counts
