import math

def mean_stdev(xs):
    n = len(xs)
    mean = math.fsum(xs) / n
    var = math.fsum((x - mean) ** 2 for x in xs) / n
    return [mean, math.sqrt(var)]
