"""The lab harness (cluster control, nemesis, history, checkers). Built in the container-lab issue."""
