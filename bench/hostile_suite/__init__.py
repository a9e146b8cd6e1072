"""The hostile-traffic and fault scenarios that bench/hostile.py runs, one
module per concept; each module's docstring says what it owns."""
