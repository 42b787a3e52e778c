import bisect

def first_at_least(xs, target):
    return bisect.bisect_left(xs, target)
