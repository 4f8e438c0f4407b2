"""Exercise specs, one module per notebook (nbNN.py), collected by autograder.registry."""
