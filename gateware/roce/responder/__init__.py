"""The RC responder: requests checked, payload placed, ACKs, NAKs, CNPs, READ responses."""
