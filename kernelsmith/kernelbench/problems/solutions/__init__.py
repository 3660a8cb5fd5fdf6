"""Hand-written honest Triton solutions of the shipped problems (ModelNew), one per problem, same name."""
