"""The network between endpoints: a faulty link, a switch, and the incast experiment."""
