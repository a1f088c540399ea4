"""rlhls.host — see DESIGN.md."""
