"""`specls demo`: replay someone typing a file through the real server and show what it suggests.

keystrokes.py  pure: typing cadence, keystroke plan, suggestion matching, summary math
client.py      `specls serve` as a subprocess behind a pygls client (also used by `specls doctor`)
replay.py      the replay itself and the plain-vs-speculative speed-up measurement
view.py        live terminal view (TTY) and line output (anything else)
"""
