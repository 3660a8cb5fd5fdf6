"""Timing: interleaved A/B with an A/A control, the judge's checks of timing claims, staged timing."""
