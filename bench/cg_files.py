#!/usr/bin/env python3
"""Self cost (Ir) per source file from a callgrind output file, inlined code counted for the
file it was written in (fi=/fe= lines). Prints 'file Ir' lines."""
import re, sys
from collections import defaultdict

def per_file(path):
    names = {}
    cost = defaultdict(int)
    cur = fl = None
    skip_next = False
    ref = re.compile(r'\((\d+)\)(?: (.*))?')
    for line in open(path, errors='replace'):
        if line[0].isdigit() or line[0] in '+-*':
            if skip_next:
                skip_next = False
                continue
            parts = line.split()
            if len(parts) >= 2 and cur is not None:
                cost[cur] += int(parts[1])
            continue
        key, _, val = line.rstrip('\n').partition('=')
        if key in ('fl', 'fi', 'fe'):
            m = ref.match(val)
            if m:
                if m.group(2) is not None:
                    names[m.group(1)] = m.group(2)
                name = names.get(m.group(1), val)
            else:
                name = val
            if key == 'fl':
                fl = name
            cur = name
        elif key == 'fn':
            cur = fl
        elif key == 'calls':
            skip_next = True
        elif key in ('cfi', 'cfl'):
            m = ref.match(val)
            if m and m.group(2) is not None:
                names[m.group(1)] = m.group(2)
    return cost

if __name__ == '__main__':
    for f, c in sorted(per_file(sys.argv[1]).items()):
        print(f, c)
