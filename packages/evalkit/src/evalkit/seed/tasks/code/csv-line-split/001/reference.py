def split_csv_line(line: str) -> list:
    fields = []
    i, n = 0, len(line)
    while True:
        if i < n and line[i] == '"':
            i += 1
            buf = []
            while True:
                if line[i] == '"':
                    if i + 1 < n and line[i + 1] == '"':
                        buf.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                buf.append(line[i])
                i += 1
            fields.append("".join(buf))
        else:
            j = line.find(",", i)
            j = n if j < 0 else j
            fields.append(line[i:j])
            i = j
        if i >= n:
            return fields
        i += 1  # skip the comma
        if i == n:
            fields.append("")
            return fields
