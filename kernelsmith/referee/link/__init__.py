"""The judge <-> runner link: the message channel, shared tensor regions, and how the link fails."""
