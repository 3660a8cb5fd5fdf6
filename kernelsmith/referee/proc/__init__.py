"""The referee's processes and their links: worker (judge), runner, oracle, zygote, compile child."""
