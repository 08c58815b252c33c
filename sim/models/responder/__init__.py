"""Reference model of the RC responder's decision and its notification point."""
