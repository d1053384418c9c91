module github.com/oblivkv/oblivkv

go 1.26.8
