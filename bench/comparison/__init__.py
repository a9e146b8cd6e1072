"""The comparison of Gapura with nginx and HAProxy that bench/compare.py runs,
one module per concern; each module's docstring says what it owns."""
