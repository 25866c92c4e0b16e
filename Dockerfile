# hybridlimitd: docker build -t hybridlimitd . && docker run -p 8080:8080 -p 8081:8081 hybridlimitd
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /hybridlimitd ./cmd/hybridlimitd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /hybridlimitd /hybridlimitd
COPY docs/examples/rules.yaml /etc/hybridlimitd/rules.yaml
USER nonroot:nonroot
EXPOSE 8080 8081 7946
ENTRYPOINT ["/hybridlimitd"]
CMD ["--config", "/etc/hybridlimitd/rules.yaml"]
