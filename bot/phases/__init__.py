"""The phases of one `kernelsmith-bot run`, in the order bot/run.py runs them.

gate.py      the event → the work list; for a comment, the commenter's permission first
schedule.py  a schedule (or workflow_dispatch): the stale operators within the run's budget
comment.py   a `/kernelsmith` command from a permitted user: its answer and its work item
rebase.py    `/kernelsmith rebase`: the bot PR's winner, queued for a replay on the current base
optimize.py  `--stage all` only: `kernelsmith optimize` + `verify` in token-free subprocesses
publish.py   one verified run → its PR, the state, the reply (the CLI's `publish` uses it too)
replies.py   the reply comment and its texts (replies.md)
"""
