"""rlhls.partition — see DESIGN.md."""
