"""What both front ends draw and write: figures, timeline level of detail, tables, export files.

The CLI (overlapscope/) and the dashboard (app/) stand side by side on this package and on
analyzers/; neither imports the other, and nothing here imports either of them.
"""
