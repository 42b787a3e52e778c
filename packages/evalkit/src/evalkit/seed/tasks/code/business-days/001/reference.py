import datetime

def business_days(start: str, end: str) -> int:
    s = datetime.date.fromisoformat(start)
    e = datetime.date.fromisoformat(end)
    if e < s:
        return 0
    days = (e - s).days + 1
    weeks, extra = divmod(days, 7)
    count = weeks * 5
    wd = s.weekday()
    for i in range(extra):
        if (wd + i) % 7 < 5:
            count += 1
    return count
