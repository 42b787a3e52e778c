from collections import OrderedDict

def lru_misses(capacity, requests):
    cache = OrderedDict()
    misses = 0
    for key in requests:
        if key in cache:
            cache.move_to_end(key)
            continue
        misses += 1
        if capacity == 0:
            continue
        if len(cache) >= capacity:
            cache.popitem(last=False)
        cache[key] = True
    return misses
