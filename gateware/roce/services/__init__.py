"""Services the endpoint runs on its QPs: the rping server (:mod:`.rping_server`)."""
