def add_decimal(a: str, b: str) -> str:
    return str(int(a, 10) + int(b, 10))
