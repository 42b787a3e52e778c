import re

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}

def parse_duration(s: str) -> int:
    total = 0
    for num, unit in re.findall(r"([0-9]+)([dhmsDHMS])", s):
        total += int(num) * _UNITS[unit.lower()]
    return total
