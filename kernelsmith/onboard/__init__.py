"""The target stage: target yamls (config), harnesses, operator loading, checkouts, operator discovery
(scan), per-operator state and staleness (state), and the resolved task one search works on.

Imports nothing at package level, so a light caller (the light-import plugin, the bot) pays only for
the module it uses.
"""
