import datetime

def add_days(date: str, n: int) -> str:
    d = datetime.date.fromisoformat(date) + datetime.timedelta(days=n)
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}"
