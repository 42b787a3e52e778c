def moving_average(xs, window):
    if window > len(xs):
        return []
    return [sum(xs[i:i + window]) / window for i in range(len(xs) - window + 1)]
