import re
from collections import Counter

def top_words(text: str, k: int) -> list:
    words = []
    cur = []
    for ch in text:
        if ch.isalpha():
            cur.append(ch)
        elif cur:
            words.append("".join(cur).lower())
            cur = []
    if cur:
        words.append("".join(cur).lower())
    counts = Counter(words)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [[w, c] for w, c in ranked[:k]]
