"""The GitHub side of kernelsmith: Actions events, comment commands, publishing PRs, the dashboard."""
