"""The launch-space model: where an operator file's launch choices live, what they launch, and the
code rendered from chosen values."""
