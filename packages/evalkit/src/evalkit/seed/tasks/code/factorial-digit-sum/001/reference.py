import math

def factorial_digit_sum(n: int) -> int:
    return sum(int(c) for c in str(math.factorial(n)))
