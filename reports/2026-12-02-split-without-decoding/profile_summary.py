"""Where a read node's feeding time goes, from py-spy's collapsed stacks (profile_feed.sh):
python profile_summary.py read_node-*.txt. Per file: samples, then the functions holding the most
samples, inclusive (on the stack anywhere) and self (the leaf), as shares of the samples."""
import collections
import sys

for path in sys.argv[1:]:
    inclusive, leaf, total = collections.Counter(), collections.Counter(), 0
    for line in open(path):
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack:
            continue
        count = int(count)
        frames = [frame.split(" (")[0] + " " + frame.split("/")[-1].rstrip(")").split(":")[0]
                  for frame in stack.split(";")]
        total += count
        leaf[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    print(f"{path}: {total} samples")
    for title, counter in (("inclusive", inclusive), ("self", leaf)):
        print(f"  {title}:")
        for frame, count in counter.most_common(25):
            print(f"    {100 * count / total:5.1f}%  {frame}")
