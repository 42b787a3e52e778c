def format_duration(seconds: int) -> str:
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    rest = abs(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        q, rest = divmod(rest, size)
        if q:
            parts.append(f"{q}{unit}")
    return sign + " ".join(parts)
