/** A free TCP port for a local torch.distributed store (a trainer group's, a weight-sync group's). */
import { createServer } from "node:net";

/** A TCP port free on the loopback interface now: the OS picks it for a listener that is closed at once. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => {
        resolve(port);
      });
    });
  });
}
