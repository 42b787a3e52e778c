import heapq

def course_order(n, prereqs):
    indeg = [0] * n
    succ = [[] for _ in range(n)]
    for a, b in prereqs:
        succ[a].append(b)
        indeg[b] += 1
    heap = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        v = heapq.heappop(heap)
        out.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, w)
    return out if len(out) == n else None
