"""One router per resource; ``control_plane.app`` includes them in this order
(the order of the paths in the OpenAPI document)."""
