import sys, collections, re
def load(path):
    for line in open(path):
        line=line.rstrip('\n')
        if not line: continue
        stack, _, n = line.rpartition(' ')
        yield stack.split(';'), int(n)
def short(f):
    # "func (path:line)" -> func (file)
    m=re.match(r'(.*) \((.*?):?(\d*)\)$', f)
    if not m: return f
    name, path = m.group(1), m.group(2)
    return f"{name} ({path.split('/')[-1]})"
for path in sys.argv[1:]:
    total=0; incl=collections.Counter(); selfc=collections.Counter(); idle=0
    for frames, n in load(path):
        total+=n
        fr=[short(f) for f in frames]
        for f in set(fr): incl[f]+=n
        selfc[fr[-1]]+=n
    print(f"== {path}: {total} samples")
    print("-- inclusive top 45")
    for f,n in incl.most_common(45): print(f"{100*n/total:5.1f}% {f}")
    print("-- self top 25")
    for f,n in selfc.most_common(25): print(f"{100*n/total:5.1f}% {f}")
