_SMALL = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
          "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
          "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]

def _below_thousand(n):
    words = []
    if n >= 100:
        words += [_SMALL[n // 100], "hundred"]
        n %= 100
    if n >= 20:
        t, u = divmod(n, 10)
        words.append(_TENS[t] + (f"-{_SMALL[u]}" if u else ""))
    elif n:
        words.append(_SMALL[n])
    return words

def number_to_words(n):
    if n == 0:
        return "zero"
    if n < 0:
        return "minus " + number_to_words(-n)
    words = []
    for size, name in ((10**9, "billion"), (10**6, "million"), (10**3, "thousand"), (1, "")):
        group, n = divmod(n, size)
        if group:
            words += _below_thousand(group)
            if name:
                words.append(name)
    return " ".join(words)
