// A Kafka consumer in a group, on Apache Kafka's own Java client: subscribes to one topic from the
// earliest offset, reads until it has WANT records or IDLE_MS pass without one, commits, and prints
// each record as one line of tab-separated fields, bytes in base64 ("-" for null), after an "R" (the
// client's own log lines may share the output):
//   R partition offset timestamp key value header-name:header-value,...
// Run as a single source file (Java 11+): java -cp 'JARS/*' RecordDump.java BOOTSTRAP GROUP TOPIC WANT [k=v ...]
// where k=v are extra consumer properties (security settings, isolation.level).
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class RecordDump {
    private static final long IDLE_MS = 60_000;

    private static String b64(byte[] bytes) {
        return bytes == null ? "-" : Base64.getEncoder().encodeToString(bytes);
    }

    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "false");
        props.put("check.crcs", "true");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        for (int i = 4; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            props.put(kv[0], kv[1]);
        }
        long want = Long.parseLong(args[3]);
        long seen = 0;
        StringBuilder out = new StringBuilder();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(args[2]));
            long lastRecord = System.currentTimeMillis();
            while (seen < want && System.currentTimeMillis() - lastRecord < IDLE_MS) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    List<String> headers = new ArrayList<>();
                    for (Header h : r.headers()) {
                        headers.add(b64(h.key().getBytes(java.nio.charset.StandardCharsets.UTF_8)) + ":" + b64(h.value()));
                    }
                    out.append("R\t").append(r.partition()).append('\t').append(r.offset()).append('\t').append(r.timestamp())
                        .append('\t').append(b64(r.key())).append('\t').append(b64(r.value()))
                        .append('\t').append(String.join(",", headers)).append('\n');
                    seen++;
                    lastRecord = System.currentTimeMillis();
                }
            }
            consumer.commitSync();
        }
        System.out.print(out);
        System.out.flush();
    }
}
