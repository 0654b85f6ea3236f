"""The differential test layer (docs/testing.md): every namespace function and nn layer, eagerly
with and without autograd, compiled, against the float64 reference, on every device."""
