"""Reference models of the services the endpoint runs on its QPs: the rping server
(:mod:`.rping`) and the rping client it serves."""
