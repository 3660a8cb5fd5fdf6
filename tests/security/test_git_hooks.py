"""Attack: the target's `setup` writes its checkout, `.git` included. It turns the worktree's `.git`
into a repository of its own (the store's objects borrowed through `alternates`) with hooks
(`post-checkout`, `reference-transaction`, `post-index-change`, ...), `core.fsmonitor` and an
`include.path` naming more hooks. Each writes a marker outside when run. git run later by the trusted
side in that checkout (`worktree add`, `reset --hard`, `clean`) ran them as the bot's user. Now every
trusted git command names the cache's bare store (kernelsmith/gitsafe.py) and a used worktree is
deleted, never reset, so after scan, evaluate, optimize and verify no marker exists."""

import json
import os
import subprocess

from hostile_demo import OP_FILE, demo_target, needs_sandbox, python_first_on_path

from kernelsmith.cli import main

HOOKS = ("post-checkout", "reference-transaction", "post-index-change", "post-merge", "post-rewrite",
         "post-commit", "pre-auto-gc", "pre-commit")

# Repository content: run by `setup` (inside the sandbox, where the markers cannot be written).
HOSTILE_SETUP = r"""#!/bin/sh
set -e
M="$1"
[ -f .git ] || exit 0        # already a planted repository
gd=$(sed -n 's/^gitdir: //p' .git)
store=$(dirname "$(dirname "$gd")")
sha=$(cat "$gd/HEAD")
rm .git
mkdir -p .git/objects/info .git/refs/heads .git/hooks .git/more-hooks
echo "$store/objects" > .git/objects/info/alternates
echo "$sha" > .git/refs/heads/main
echo "ref: refs/heads/main" > .git/HEAD
for dir in hooks more-hooks; do
  for h in HOOKS fsmonitor; do
    printf '#!/bin/sh\necho "$0 $*" >> "%s/%s-%s-$$"\nexit 0\n' "$M" "$dir" "$h" > ".git/$dir/$h"
    chmod +x ".git/$dir/$h"
  done
done
printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = %s/.git/hooks/fsmonitor\n' \
  "$PWD" > .git/config
printf '[include]\n\tpath = %s/.git/extra.cfg\n' "$PWD" >> .git/config
printf '[core]\n\thooksPath = %s/.git/more-hooks\n\tfsmonitor = %s/.git/more-hooks/fsmonitor\n' \
  "$PWD" "$PWD" > .git/extra.cfg
""".replace("HOOKS", " ".join(HOOKS))


@needs_sandbox
def test_hooks_planted_by_setup_never_run(tmp_path, monkeypatch):
    python_first_on_path(monkeypatch)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    markers = tmp_path / "markers"
    markers.mkdir()
    yaml_path = demo_target(tmp_path, files={"tools/setup.sh": HOSTILE_SETUP},
                            setup=f"sh tools/setup.sh {markers}")
    yaml = str(yaml_path)
    assert main(["scan", yaml, "--json"]) == 0
    assert main(["evaluate", yaml, "rms_norm", "--device", "interpret", "--json"]) == 0
    run = tmp_path / "run"
    assert main(["optimize", yaml, "rms_norm", "--budget", "1", "--mutator", "params", "--device",
                 "interpret", "--out", str(run), "--no-progress"]) in (0, 1)
    info = json.loads((run / "run.json").read_text())
    winner = run / "winner" / os.path.basename(OP_FILE)
    if not winner.is_file():  # the one proposal was not kept: the base plus a comment stands in
        winner.parent.mkdir(exist_ok=True)
        winner.write_text((tmp_path / "src" / OP_FILE).read_text() + "\n# winner\n")
    main(["verify", str(run)])
    doc = json.loads((run / "verify.json").read_text())
    assert not list(markers.iterdir()), sorted(p.name for p in markers.iterdir())
    assert doc["status"] == "pass", doc["reason"]  # verify's own fresh worktrees worked
    # The attack is live: setup did plant its repository in the checkout, and git left to find its
    # repository there (as the old code did) runs what was planted.
    checkout = info["checkout"]
    assert os.path.isdir(os.path.join(checkout, ".git", "more-hooks"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "-C", checkout, "status", "--short"], env=env, capture_output=True)
    assert list(markers.iterdir())
