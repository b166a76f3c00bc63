
tf-entrypoint1.2.3binary_tensor_data