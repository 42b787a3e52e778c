def second_largest(xs):
    distinct = sorted(set(xs), reverse=True)
    return distinct[1] if len(distinct) >= 2 else None
