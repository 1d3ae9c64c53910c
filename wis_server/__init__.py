"""The composition root: the `wyoming-wis` command (`__main__.py`) reads the settings, keeps everything local, then
`serve.py` loads the core (wyoming_wis) and mounts every frontend on it: Wyoming, the HTTP API with WebRTC. It sits
above all of them, so nothing below imports it."""
