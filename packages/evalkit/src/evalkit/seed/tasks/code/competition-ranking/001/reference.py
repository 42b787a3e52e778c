def leaderboard(scores):
    ordered = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
    out = []
    for i, (name, score) in enumerate(ordered):
        rank = out[-1][0] if out and out[-1][2] == score else i + 1
        out.append([rank, name, score])
    return out
