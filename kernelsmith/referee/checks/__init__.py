"""What the referee checks of a candidate: correctness trials, integrity, static checks, and why a
base failed."""
