"""miocore: find and run the fastest convolution algorithm for a problem."""
