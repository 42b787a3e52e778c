from collections import Counter

def count_pairs(xs, target):
    seen = Counter()
    total = 0
    for x in xs:
        total += seen[target - x]
        seen[x] += 1
    return total
