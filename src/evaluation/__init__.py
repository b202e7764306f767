"""Final-policy evaluation (`evaluate.evaluate_run`) and videos (`render.render_run`).

`episodes` holds the pure first-violation and per-horizon statistics both build on.
"""
