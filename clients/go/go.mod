module github.com/mailroom-dev/mailroom/clients/go

go 1.19
